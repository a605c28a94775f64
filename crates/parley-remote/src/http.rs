//! One remote HTTP server behind the one client stack of every remote call
//! (`parley_http::Client`: bounded retries under the policy every HTTP client of Parley shares, a
//! concurrency limit shared by every session of the server, a timeout on each attempt, and a
//! bounded body read under it, which also redacts every key Parley holds).
//!
//! Owns: how bytes go to a server and come back, its cookies, and its errors as
//! [`RemoteError`]s naming it. Never interprets a body: the callers (NeMo Gym, Gymnasium, the
//! Responses client) decide what a status or a body means, and may say which 2xx bodies they
//! accept, so that others are retried within the same budget.

pub mod cookies;

use std::sync::Arc;
use std::time::Duration;

use parley_http::client::Limits;
use parley_http::{Accept, Answer, Client, Failure, excerpt, secrets};
use reqwest::header::{COOKIE, HeaderMap, HeaderValue, SET_COOKIE};
use serde_json::Value;

use crate::error::RemoteError;
pub use cookies::CookieJar;
pub use parley_http::Retry;

/// Limits for every call to one server: the one client stack's.
pub type ServerOptions = Limits;

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
    client: Client,
}

impl std::fmt::Debug for HttpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpServer").field("name", &self.name).field("base", &self.base_url()).finish_non_exhaustive()
    }
}

impl HttpServer {
    /// A server at `base_url` (`http://host:port`, any path prefix kept), called `name` in errors.
    pub fn new(name: &str, base_url: &str, options: &ServerOptions) -> Result<HttpServer, RemoteError> {
        HttpServer::with_bearer(name, base_url, options, None)
    }

    /// Like [`new`](Self::new), with `Authorization: Bearer <key>` on every request. The key
    /// lives only in the header it is sent in, marked sensitive.
    pub fn with_bearer(
        name: &str,
        base_url: &str,
        options: &ServerOptions,
        key: Option<&str>,
    ) -> Result<HttpServer, RemoteError> {
        let client = Client::new(base_url, options, key).map_err(|e| match e {
            parley_http::ClientError::BadUrl(_) => {
                RemoteError::Config(format!("`{base_url}` is not an http(s) URL for server `{name}`"))
            }
            parley_http::ClientError::BadKey => {
                RemoteError::Config(format!("the API key for `{name}` is not a valid header value"))
            }
            other => RemoteError::Config(other.to_string()),
        })?;
        Ok(HttpServer { name: name.into(), client })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn base_url(&self) -> &str {
        self.client.base_url()
    }

    /// How errors name this server: its name and URL.
    pub fn label(&self) -> String {
        format!("server `{}` at {}", self.name, self.base_url())
    }

    /// Posts `body` as JSON to `path`, sending the jar's cookies and merging the answer's
    /// `Set-Cookie` into it. Any status is an `Ok`: the caller decides what it means.
    pub async fn post(
        &self,
        path: &str,
        body: &(impl serde::Serialize + ?Sized),
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
        body: &(impl serde::Serialize + ?Sized),
        jar: Option<&mut CookieJar>,
        retry: Retry,
        accept: Option<Accept>,
    ) -> (Result<Exchange, RemoteError>, u32) {
        let call = format!("POST {path}");
        let bytes = match serde_json::to_vec(body) {
            Ok(bytes) => bytes,
            Err(e) => {
                let cause = format!("the body is not serializable: {e}");
                return (Err(RemoteError::Protocol { server: self.label(), call, cause }), 0);
            }
        };
        let mut headers = HeaderMap::new();
        if let Some(cookie) = jar.as_deref().and_then(CookieJar::header) {
            match HeaderValue::from_str(&cookie) {
                Ok(value) => headers.insert(COOKIE, value),
                Err(e) => {
                    let cause = format!("the session's cookies are not a header value: {e}");
                    return (Err(RemoteError::Protocol { server: self.label(), call, cause }), 0);
                }
            };
        }
        let (result, attempts) = self.client.post_json(path, bytes, headers, retry, accept).await;
        let exchange = match result {
            Ok(answer) => Exchange::from(answer),
            Err(failure) => return (Err(self.classify(call, failure, attempts)), attempts),
        };
        if let Some(jar) = jar {
            jar.merge(exchange.set_cookies.iter().map(String::as_str));
        }
        (Ok(exchange), attempts)
    }

    /// Whether the server answers `GET path` with a 2xx (one attempt, for readiness polls).
    pub async fn is_up(&self, path: &str) -> bool {
        self.client.is_up(path).await
    }

    fn classify(&self, call: String, failure: Failure, attempts: u32) -> RemoteError {
        let server = self.label();
        match failure {
            Failure::Unsendable(cause) => RemoteError::Protocol { server, call, cause },
            Failure::Timeout => RemoteError::Timeout { server, call, timeout: self.client.limits().timeout, attempts },
            Failure::TooLarge(too_large) => {
                let cause = format!("the body is larger than the limit of {} bytes", too_large.limit);
                RemoteError::Malformed { server, call, cause, body: String::new() }
            }
            Failure::Unaccepted(unaccepted) => {
                let body = excerpt(&String::from_utf8_lossy(&unaccepted.body));
                RemoteError::Malformed { server, call, cause: unaccepted.why, body }
            }
            Failure::Connect(cause) => RemoteError::Connect { server, call, attempts, cause },
            Failure::Transport(cause) => RemoteError::Transport { server, call, attempts, cause },
        }
    }
}

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
