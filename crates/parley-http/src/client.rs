//! The one client stack of Parley's remote calls, and a client for one HTTP server built on it.
//!
//! [`stack`] puts the service that sends one attempt behind, outside in: the one retry policy
//! ([`RetryPolicy`], which honours the session's deadline), a timeout on each attempt, and the
//! bounded whole-body read
//! ([`WholeBodyLayer`], which redacts every registered key). Every attempt is a [`Request`] sent
//! on its endpoint's connections ([`Endpoint::sender`]: Parley's own HTTP/1.1 client, [`Plain`],
//! for an `http://` endpoint; hyper's pooled client over rustls for an `https://` one): the model
//! client's (`parley-llm`) and [`Client`]'s, for every other call: NeMo Gym and Gymnasium servers
//! and the Responses client (`parley-remote`), and the reward model (`parley-rewards`).
//! [`Failure`] says what a failed call's error was, for each caller to report in its own error
//! type. Redirects are not followed: a 3xx is the call's answer, so a request and its key go
//! only to the URL their client was made for.
//!
//! Every call first takes a [`Slot`] of its [`Endpoint`], one of the endpoint's bound on calls in
//! flight that every client of it in the process shares, and holds it to its last attempt's end.
//! The model client takes it before it serializes its request, and its callers before they
//! build theirs (`ModelClient::ready`), so a session that waits for one holds no request: a run
//! of 100,000 sessions whose calls share a few thousand connections keeps its memory for the
//! sessions.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use http::{Method, Uri};
use http_body_util::{Either, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use parley_core::url::NotABase;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::util::BoxCloneSyncService;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};

use crate::body::{Answer, TooLarge, WholeBodyLayer};
use crate::plain::Plain;
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
    /// Calls in flight to the endpoint at once, over every client of it in the process (see
    /// [`endpoint`]): each holds one of its connections, so this bounds them too.
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

/// The one stack (see the module's docs) around `endpoint`'s connections, which send each
/// attempt. Its caller holds a [`Slot`] of the endpoint for the whole call, taken before the
/// attempt's timeout starts, so a session queued behind the bound keeps its whole per-attempt
/// budget.
pub fn stack<A>(limits: &Limits, endpoint: &Endpoint) -> Stack<A>
where
    A: Attempt<Request = Request> + Send + 'static,
{
    let service = ServiceBuilder::new()
        .retry(limits.retry_policy())
        .map_request(A::into_request)
        .timeout(limits.timeout)
        .layer(WholeBodyLayer { limit: limits.max_response_bytes })
        .service(endpoint.sender(limits.max_response_bytes));
    BoxCloneSyncService::new(service)
}

/// What the whole process shares of one endpoint: its connection pool and its bound on calls in
/// flight, while a client of it lives.
#[derive(Clone)]
pub struct Endpoint(Arc<Shared>);

/// The connections of one endpoint: Parley's own HTTP/1.1 client ([`Plain`]) for an `http://`
/// endpoint, hyper's pooled client over rustls for an `https://` one.
#[derive(Clone)]
enum Pool {
    Plain(Arc<Plain>),
    Tls(Arc<TlsPool>),
}

/// hyper's pooled client, over TLS (or TCP, for a URL it is handed that asks for it).
type TlsPool = hyper_util::client::legacy::Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// An answer's body as a [`Sender`] gives it: whole from [`Plain`], streamed from hyper.
pub type SentBody = Either<Full<Bytes>, hyper::body::Incoming>;

/// The service that sends one attempt on an endpoint's connections ([`Endpoint::sender`]).
#[derive(Clone)]
pub struct Sender {
    pool: Pool,
    /// The most bytes of body [`Plain`] reads of an answer (hyper's are counted by the
    /// [`WholeBodyLayer`] as they come).
    limit: usize,
}

impl Service<Request> for Sender {
    type Response = http::Response<SentBody>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<http::Response<SentBody>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Neither waits for room: the endpoint's slots bound the calls.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        match &self.pool {
            Pool::Plain(plain) => {
                let (plain, limit) = (plain.clone(), self.limit);
                Box::pin(async move { Ok(plain.send(request, limit).await?.map(|body| Either::Left(Full::new(body)))) })
            }
            Pool::Tls(client) => {
                let answer = client.request(request.into_http());
                Box::pin(async move { Ok(answer.await?.map(Either::Right)) })
            }
        }
    }
}

struct Shared {
    /// The connection pool. Keys travel in request headers, never in the pool, so sharing it
    /// shares no credentials.
    pool: Pool,
    /// Calls in flight to the endpoint at once, over every client of it.
    calls: Arc<Semaphore>,
    /// The bound `calls` was made with.
    bound: usize,
}

impl Endpoint {
    /// The service that sends one attempt on the endpoint's connections, reading at most `limit`
    /// bytes of an answer's body.
    pub fn sender(&self, limit: usize) -> Sender {
        Sender { pool: self.0.pool.clone(), limit }
    }

    /// The most calls in flight to the endpoint at once.
    pub fn bound(&self) -> usize {
        self.0.bound
    }

    /// Whether the two are the same endpoint (the same pool and bound).
    pub fn is(&self, other: &Endpoint) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Waits for one of the endpoint's calls in flight, first come first served; the call holds
    /// it to its end.
    pub async fn slot(&self) -> Slot {
        // The semaphore is never closed.
        Slot { _permit: self.0.calls.clone().acquire_owned().await.ok() }
    }
}

/// One of an [`Endpoint`]'s calls in flight, given back when dropped.
#[derive(Debug)]
pub struct Slot {
    _permit: Option<OwnedSemaphorePermit>,
}

/// The endpoint at `base`, made with the bound `max_concurrency` by its first client in the
/// process. Every client of an endpoint (the agent and a simulated user served by the same one,
/// a client per rollout that a trainer names the same policy URL for, every session's calls to
/// one server) shares its connections and its bound: a session uses one connection at a time,
/// so separate pools would hold twice the sockets and buffers (about half the memory of a run
/// at 10,000 sessions), and separate bounds would let a run open more sockets than its
/// open-files limit allows. A call past the bound waits for one to finish, its session still in
/// flight.
///
/// The process keeps an endpoint while a client of it lives, and no longer: its pool and its
/// connections go with its last client, so a service whose trainer names a new policy URL for
/// every rollout holds the endpoints of the rollouts in flight, not of every rollout it served.
pub fn endpoint(base: &str, max_concurrency: usize) -> Result<Endpoint, ClientError> {
    static ENDPOINTS: OnceLock<Mutex<HashMap<String, Weak<Shared>>>> = OnceLock::new();
    let mut endpoints = ENDPOINTS.get_or_init(Mutex::default).lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(shared) = endpoints.get(base).and_then(Weak::upgrade) {
        if shared.bound != max_concurrency.max(1) {
            tracing::debug!(
                base,
                bound = shared.bound,
                asked = max_concurrency,
                "the endpoint's bound on calls in flight was set by its first client"
            );
        }
        return Ok(Endpoint(shared));
    }
    let bound = max_concurrency.max(1);
    let pool = if base.starts_with("http://") {
        Pool::Plain(Arc::new(Plain::new(bound)))
    } else {
        Pool::Tls(Arc::new(tls(bound)?))
    };
    let shared = Arc::new(Shared { pool, calls: Arc::new(Semaphore::new(bound)), bound });
    // The endpoints no client holds any more go as a new one comes.
    endpoints.retain(|_, held| held.strong_count() > 0);
    endpoints.insert(base.to_owned(), Arc::downgrade(&shared));
    Ok(Endpoint(shared))
}

/// A pool keeping at most `idle` connections open between calls, each for up to 90 s, whose
/// `https` URLs are checked against the platform's roots (as a browser on the machine would).
fn tls(idle: usize) -> Result<TlsPool, ClientError> {
    use rustls_platform_verifier::BuilderVerifierExt;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|builder| builder.with_platform_verifier())
        .map_err(|e| ClientError::Http(format!("TLS: {e}")))?
        .with_no_client_auth();
    let mut tcp = HttpConnector::new();
    tcp.set_nodelay(true);
    tcp.enforce_http(false);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp);
    Ok(hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(idle)
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .build(connector))
}

/// One request of the stack, kept whole so that a retry sends it again as it was: a copy shares
/// the URL's, the headers' and the body's bytes. Its headers are usually its client's, the same
/// for every call (the key's and the content type: [`json_headers`]).
#[derive(Debug, Clone)]
pub struct Request {
    pub(crate) method: Method,
    pub(crate) uri: Uri,
    pub(crate) headers: Arc<HeaderMap>,
    pub(crate) body: Bytes,
}

impl Request {
    /// A POST of the JSON text `body` to `uri` (absolute), with `headers`, which say it is JSON
    /// ([`json_headers`]).
    pub fn post(uri: Uri, headers: Arc<HeaderMap>, body: Bytes) -> Request {
        Request { method: Method::POST, uri, headers, body }
    }

    /// A GET of `uri` (absolute), with `headers`.
    pub fn get(uri: Uri, headers: Arc<HeaderMap>) -> Request {
        Request { method: Method::GET, uri, headers, body: Bytes::new() }
    }

    /// The request as hyper sends it.
    fn into_http(self) -> http::Request<Full<Bytes>> {
        let mut request = http::Request::new(Full::new(self.body));
        *request.method_mut() = self.method;
        *request.uri_mut() = self.uri;
        *request.headers_mut() = Arc::unwrap_or_clone(self.headers);
        request
    }
}

/// `headers` with the JSON content type, for [`Request::post`]: made once by a client, shared
/// by all of its calls.
pub fn json_headers(mut headers: HeaderMap) -> Arc<HeaderMap> {
    headers.entry(CONTENT_TYPE).or_insert(HeaderValue::from_static("application/json"));
    Arc::new(headers)
}

/// `url` as a client's base: an `http://` or `https://` URL without a trailing `/` and without a
/// user part (see [`parley_core::url`]), which no client sends and no record should keep.
pub fn base(url: &str) -> Result<&str, ClientError> {
    parley_core::url::base(url.trim_end_matches('/')).map_err(|not| match not {
        NotABase::NotHttp => ClientError::BadUrl(url.to_owned()),
        NotABase::Credentials(without) => ClientError::Credentials(without),
    })
}

/// `base` (`http(s)://host:port`, any path prefix) and `path` as one absolute URI, or why not.
pub fn uri(base: &str, path: &str) -> Result<Uri, ClientError> {
    format!("{base}{path}").parse().map_err(|_| ClientError::BadUrl(format!("{base}{path}")))
}

/// Why a client could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("`{0}` is not an http(s) URL")]
    BadUrl(String),
    /// The URL, named without its user part.
    #[error("{}", parley_core::url::credentials_refused("the URL", .0))]
    Credentials(String),
    #[error("the API key is not a valid header value")]
    BadKey,
    #[error("could not build the HTTP client: {0}")]
    Http(String),
}

/// Which 2xx bodies a call accepts; see [`Attempt::accept`].
pub type Accept = fn(&[u8]) -> Result<(), String>;

/// One request of a [`Client`], which failures it may be retried after, and which 2xx bodies it
/// accepts.
#[derive(Debug, Clone)]
pub struct Post {
    request: Request,
    retry: Retry,
    accept: Option<Accept>,
}

impl Attempt for Post {
    type Request = Request;

    fn into_request(self) -> Request {
        self.request
    }

    fn resend(&self) -> Option<Post> {
        Some(self.clone())
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
    endpoint: Endpoint,
    bearer: Option<HeaderValue>,
    /// The headers of a call that adds none: the JSON content type and the key's.
    headers: Arc<HeaderMap>,
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
        let base = base(base_url)?;
        let bearer = key.filter(|k| !k.is_empty()).map(bearer).transpose()?;
        let endpoint = endpoint(base, limits.max_concurrency)?;
        let service = stack(limits, &endpoint);
        let headers = json_headers(HeaderMap::from_iter(bearer.clone().map(|b| (AUTHORIZATION, b))));
        Ok(Client { base: base.into(), endpoint, bearer, headers, service, limits: limits.clone() })
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
        let uri = match uri(&self.base, path) {
            Ok(uri) => uri,
            Err(e) => return (Err(Failure::Unsendable(format!("could not build the request: {e}"))), 0),
        };
        // A call's own headers (a session's cookies) are added to the client's: the key's replaces
        // any of the caller's, the content type is the caller's when it gave one.
        let headers = if headers.is_empty() {
            self.headers.clone()
        } else {
            let mut headers = headers;
            if let Some(bearer) = &self.bearer {
                headers.insert(AUTHORIZATION, bearer.clone());
            }
            json_headers(headers)
        };
        let request = Request::post(uri, headers, Bytes::from(body));
        let call = async {
            let _slot = self.endpoint.slot().await;
            self.service.clone().oneshot(Post { request, retry, accept }).await
        };
        let (result, attempts) = crate::track(call).await;
        (result.map_err(Failure::of), attempts)
    }

    /// Whether the server answers `GET path` with a 2xx (one attempt, for readiness polls).
    pub async fn is_up(&self, path: &str) -> bool {
        let Ok(uri) = uri(&self.base, path) else { return false };
        let headers = HeaderMap::from_iter(self.bearer.clone().map(|bearer| (AUTHORIZATION, bearer)));
        let request = Request::get(uri, Arc::new(headers));
        let sent = self.endpoint.sender(self.limits.max_response_bytes).oneshot(request);
        matches!(
            tokio::time::timeout(Duration::from_secs(2), sent).await,
            Ok(Ok(response)) if response.status().is_success()
        )
    }
}

/// The `Authorization` header that carries `key`, marked sensitive. The key is registered with
/// [`secrets`] first, so that no body read afterwards carries it, and lives only in this header.
pub fn bearer(key: &str) -> Result<HeaderValue, ClientError> {
    secrets::register(key);
    let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| ClientError::BadKey)?;
    value.set_sensitive(true);
    Ok(value)
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
        if crate::retry::is_unsent(&error) { Failure::Connect(chain) } else { Failure::Transport(chain) }
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    #[test]
    fn a_base_with_a_user_part_is_refused_by_every_client() {
        let limits = Limits::default();
        let err = Client::new("http://me:hunter2@10.0.0.7:8000/", &limits, None).unwrap_err();
        assert!(matches!(&err, ClientError::Credentials(url) if url == "http://10.0.0.7:8000"), "{err}");
        assert!(!err.to_string().contains("hunter2"), "{err}");
        assert!(matches!(base("ftp://h"), Err(ClientError::BadUrl(_))));
        assert_eq!(base("http://h:1/v1/").unwrap(), "http://h:1/v1");
        assert_eq!(Client::new("http://10.0.0.7:8000/", &limits, None).unwrap().base_url(), "http://10.0.0.7:8000");
    }

    /// What the server saw at most at once.
    #[derive(Default)]
    struct Peaks {
        connections: AtomicUsize,
        most_connections: AtomicUsize,
        calls: AtomicUsize,
        most_calls: AtomicUsize,
        served: AtomicUsize,
    }

    fn raise(now: &AtomicUsize, most: &AtomicUsize) {
        let n = now.fetch_add(1, Ordering::SeqCst) + 1;
        most.fetch_max(n, Ordering::SeqCst);
    }

    /// An HTTP/1.1 server that keeps connections alive and answers each POST `{}` after 2 ms,
    /// counting the connections open and the calls in flight.
    async fn counting_server() -> (String, Arc<Peaks>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let peaks = Arc::new(Peaks::default());
        let counted = peaks.clone();
        tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                let peaks = counted.clone();
                raise(&peaks.connections, &peaks.most_connections);
                tokio::spawn(async move {
                    let mut buffer = Vec::new();
                    while crate::testing::read_request(&mut socket, &mut buffer).await.is_some() {
                        raise(&peaks.calls, &peaks.most_calls);
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        peaks.calls.fetch_sub(1, Ordering::SeqCst);
                        peaks.served.fetch_add(1, Ordering::SeqCst);
                        let answer =
                            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
                        if socket.write_all(answer).await.is_err() {
                            break;
                        }
                    }
                    peaks.connections.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        (base, peaks)
    }

    /// Ten times as many sessions as the endpoint's bound, each calling it through two clients
    /// in turn (as an agent and a simulated user on the same endpoint do): every call completes,
    /// and the server never sees more calls in flight, or connections open, than the bound: a
    /// call gives its connection back before its slot. (With a bound per client, the two
    /// clients' calls in flight reach twice the bound.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn every_client_of_an_endpoint_shares_one_bound() {
        const BOUND: usize = 8;
        let (base, peaks) = counting_server().await;
        let limits = Limits { max_concurrency: BOUND, ..Limits::default() };
        let agent = Client::new(&base, &limits, None).unwrap();
        let user = Client::new(&base, &limits, Some("user-key")).unwrap();
        assert_eq!(endpoint(&base, 1000).unwrap().bound(), BOUND, "the first client sets the bound");
        let sessions: Vec<_> = (0..10 * BOUND)
            .map(|_| {
                let (agent, user) = (agent.clone(), user.clone());
                tokio::spawn(async move {
                    for turn in 0..6 {
                        let client = if turn % 2 == 0 { &agent } else { &user };
                        let (answer, _) =
                            client.post_json("/call", b"{}".to_vec(), HeaderMap::new(), Retry::Transient, None).await;
                        assert_eq!(answer.expect("the call completes").status, 200);
                    }
                })
            })
            .collect();
        for session in sessions {
            session.await.unwrap();
        }
        assert_eq!(peaks.served.load(Ordering::SeqCst), 10 * BOUND * 6);
        let most_calls = peaks.most_calls.load(Ordering::SeqCst);
        let most_connections = peaks.most_connections.load(Ordering::SeqCst);
        assert!(most_calls <= BOUND, "{most_calls} calls in flight at once, over the bound of {BOUND}");
        assert!(most_connections <= BOUND, "{most_connections} connections open at once, for a bound of {BOUND}");
    }

    /// A call's own headers go beside the client's: its cookie is sent, its own key is replaced by
    /// the client's (one `authorization` header), and its content type is kept.
    #[tokio::test]
    async fn a_calls_headers_go_beside_the_clients() {
        let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", server.local_addr().unwrap());
        let (seen, heard) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (mut socket, _) = server.accept().await.unwrap();
            let request = crate::testing::read_request(&mut socket, &mut Vec::new()).await.expect("a request");
            socket.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}").await.unwrap();
            let _ = seen.send(String::from_utf8_lossy(&request).to_lowercase());
        });
        let client = Client::new(&base, &Limits::default(), Some("headers-test-key")).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(http::header::COOKIE, HeaderValue::from_static("session=7"));
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer the-callers"));
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
        let (answer, _) = client.post_json("/run", b"{}".to_vec(), headers, Retry::Unsent, None).await;
        assert_eq!(answer.expect("an answer").status, 200);
        let request = heard.await.unwrap();
        let lines: Vec<&str> = request.lines().collect();
        assert!(lines.contains(&"cookie: session=7"), "{request}");
        assert!(lines.contains(&"content-type: application/x-ndjson"), "{request}");
        let keys: Vec<&&str> = lines.iter().filter(|l| l.starts_with("authorization:")).collect();
        assert_eq!(keys, [&"authorization: bearer headers-test-key"], "{request}");
    }

    /// A server that answers with a redirect gets that as the answer: the request, and the key
    /// in its header, go nowhere else.
    #[tokio::test]
    async fn a_redirect_is_the_answer_and_is_not_followed() {
        let elsewhere = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = format!("http://{}/steal", elsewhere.local_addr().unwrap());
        let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", server.local_addr().unwrap());
        tokio::spawn(async move {
            let (mut socket, _) = server.accept().await.unwrap();
            let mut request = [0u8; 4096];
            let _ = socket.read(&mut request).await.unwrap();
            let answer = format!("HTTP/1.1 307 Temporary Redirect\r\nlocation: {target}\r\ncontent-length: 0\r\n\r\n");
            socket.write_all(answer.as_bytes()).await.unwrap();
            let _ = socket.read(&mut request).await;
        });
        let client = Client::new(&base, &Limits::default(), Some("redirect-test-key")).unwrap();
        let (answer, attempts) =
            client.post_json("/run", b"{}".to_vec(), HeaderMap::new(), Retry::Transient, None).await;
        assert_eq!((answer.expect("an answer").status, attempts), (307, 1));
        let followed = tokio::time::timeout(Duration::from_millis(200), elsewhere.accept()).await;
        assert!(followed.is_err(), "the redirect was followed to its target");
    }

    /// A trainer that names a policy URL per rollout makes an endpoint per rollout: each goes,
    /// connections and all, with the last client of it, and one made later at the same URL is
    /// new (its own bound).
    #[tokio::test]
    async fn an_endpoint_goes_with_its_last_client() {
        let (base, peaks) = counting_server().await;
        let call = |client: Client| async move {
            let (answer, _) = client.post_json("/call", b"{}".to_vec(), HeaderMap::new(), Retry::Transient, None).await;
            assert_eq!(answer.expect("the call completes").status, 200);
        };
        let first = Client::new(&base, &Limits { max_concurrency: 3, ..Limits::default() }, None).unwrap();
        let second = first.clone();
        tokio::join!(call(first.clone()), call(second.clone()));
        assert!(peaks.connections.load(Ordering::SeqCst) > 0, "the pool keeps its connections while a client lives");
        drop(first);
        assert_eq!(endpoint(&base, 5).unwrap().bound(), 3, "a client still holds it");
        drop(second);

        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while peaks.connections.load(Ordering::SeqCst) > 0 {
            assert!(std::time::Instant::now() < deadline, "the endpoint's connections outlived its last client");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(endpoint(&base, 5).unwrap().bound(), 5, "a new endpoint, not the one let go");
    }
}
