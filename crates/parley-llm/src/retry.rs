//! A tower layer that retries transport failures, timeouts, 429 and 5xx answers with bounded
//! exponential backoff and jitter, and waits as long as an answer's `Retry-After` asks.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use async_openai::error::OpenAIError;
use async_openai::middleware::HttpRequestFactory;
use reqwest::Response;
use tower::{BoxError, Layer, Service, ServiceExt};

tokio::task_local! {
    /// Attempts made by the call running in this task, so the client can record them.
    pub(crate) static ATTEMPTS: Cell<u32>;
}

/// The longest `Retry-After` honoured; a server asking for more gets this.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy)]
pub struct RetryLayer {
    pub max_retries: u32,
    pub base_backoff: Duration,
    pub max_backoff: Duration,
}

impl<S> Layer<S> for RetryLayer {
    type Service = Retry<S>;

    fn layer(&self, inner: S) -> Retry<S> {
        Retry { inner, policy: *self }
    }
}

#[derive(Debug, Clone)]
pub struct Retry<S> {
    inner: S,
    policy: RetryLayer,
}

impl<S> Service<HttpRequestFactory> for Retry<S>
where
    S: Service<HttpRequestFactory, Response = Response> + Clone + Send + 'static,
    S::Error: Into<BoxError> + Send,
    S::Future: Send,
{
    type Response = Response;
    type Error = OpenAIError;
    type Future = Pin<Box<dyn Future<Output = Result<Response, OpenAIError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), OpenAIError>> {
        // Readiness is awaited per attempt below, so that a backoff never holds a slot of an
        // inner concurrency limit.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: HttpRequestFactory) -> Self::Future {
        let inner = self.inner.clone();
        let policy = self.policy;
        Box::pin(retry(inner, request, policy))
    }
}

async fn retry<S>(mut inner: S, request: HttpRequestFactory, policy: RetryLayer) -> Result<Response, OpenAIError>
where
    S: Service<HttpRequestFactory, Response = Response>,
    S::Error: Into<BoxError> + Send,
{
    let mut attempt = 0u32;
    loop {
        let _ = ATTEMPTS.try_with(|a| a.set(a.get() + 1));
        let result = match inner.ready().await {
            Ok(service) => service.call(request.clone()).await.map_err(Into::into),
            Err(e) => Err(e.into()),
        };
        let wait = match &result {
            Ok(response) if is_retryable_status(response.status().as_u16()) => {
                Some(retry_after(response).unwrap_or_else(|| backoff(policy, attempt)))
            }
            Ok(_) => None,
            Err(_) => Some(backoff(policy, attempt)),
        };
        match wait {
            Some(wait) if attempt < policy.max_retries => {
                tracing::debug!(attempt, ?wait, "retrying model call");
                attempt += 1;
                tokio::time::sleep(wait).await;
            }
            _ => return result.map_err(to_openai_error),
        }
    }
}

fn is_retryable_status(status: u16) -> bool {
    status == 429 || status == 408 || (500..600).contains(&status)
}

/// Exponential backoff with jitter: a random wait between half and all of `base * 2^attempt`
/// (capped), so that sessions failing together do not retry together.
fn backoff(policy: RetryLayer, attempt: u32) -> Duration {
    let ceiling = policy.base_backoff.saturating_mul(2u32.saturating_pow(attempt)).min(policy.max_backoff);
    ceiling.mul_f64(0.5 + fastrand::f64() / 2.0)
}

fn retry_after(response: &Response) -> Option<Duration> {
    let value = response.headers().get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    let seconds: f64 = value.trim().parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds).min(MAX_RETRY_AFTER))
}

fn to_openai_error(error: BoxError) -> OpenAIError {
    match error.downcast::<OpenAIError>() {
        Ok(e) => *e,
        Err(e) => OpenAIError::Boxed(e),
    }
}
