//! The retry policy of remote calls, as a tower [`Policy`]: a request that never reached the
//! server (connection refused) is always safe to send again; a request that may have reached it
//! is retried only when the call is idempotent ([`Retry::Transient`]), since a tool call can
//! change the server's state. Retries are bounded and back off exponentially, with jitter.

use std::time::Duration;

use tower::BoxError;
use tower::retry::Policy;

use super::{Call, Exchange};

/// Which failures a call may be retried after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Only failures where the request was never sent (connection refused): tool calls, seeds,
    /// steps and verifies, which may change state.
    Unsent,
    /// Also timeouts, dropped connections, 408, 429 and 5xx (after `Retry-After` when the
    /// server sends one): idempotent calls and model calls.
    Transient,
}

/// Given up after `attempts`: carries the last failure out of the retry layer.
#[derive(Debug, thiserror::Error)]
#[error("{source}")]
pub(crate) struct GaveUp {
    pub attempts: u32,
    pub source: BoxError,
}

/// The longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
pub(crate) struct RetryPolicy {
    pub max_retries: u32,
    pub base_backoff: Duration,
    pub attempts: u32,
}

impl RetryPolicy {
    /// Exponential backoff with jitter: between half and all of `base * 2^(attempt - 1)`,
    /// capped, so that sessions failing together do not retry together.
    fn backoff(&self) -> Duration {
        let ceiling = self
            .base_backoff
            .saturating_mul(2u32.saturating_pow(self.attempts.saturating_sub(1)))
            .min(Duration::from_secs(5));
        ceiling.mul_f64(0.5 + fastrand::f64() / 2.0)
    }
}

impl Policy<Call, Exchange, BoxError> for RetryPolicy {
    type Future = tokio::time::Sleep;

    fn retry(&mut self, request: &mut Call, result: &mut Result<Exchange, BoxError>) -> Option<Self::Future> {
        self.attempts += 1;
        let retryable = match &*result {
            Ok(exchange) => request.retry == Retry::Transient && matches!(exchange.status, 408 | 429 | 500..=599),
            Err(error) => is_unsent(error) || request.retry == Retry::Transient,
        };
        if retryable && self.attempts <= self.max_retries {
            tracing::debug!(url = %request.request.url(), attempt = self.attempts, "retrying a remote call");
            let wait = match &*result {
                Ok(exchange) => exchange.retry_after.map_or_else(|| self.backoff(), |w| w.min(MAX_RETRY_AFTER)),
                Err(_) => self.backoff(),
            };
            return Some(tokio::time::sleep(wait));
        }
        if result.is_err()
            && let Err(source) = std::mem::replace(result, Ok(Exchange::default()))
        {
            *result = Err(Box::new(GaveUp { attempts: self.attempts, source }));
        }
        None
    }

    fn clone_request(&mut self, request: &Call) -> Option<Call> {
        Some(Call { request: request.request.try_clone()?, retry: request.retry })
    }
}

/// Whether the request certainly never reached the server.
pub(crate) fn is_unsent(error: &BoxError) -> bool {
    error.downcast_ref::<reqwest::Error>().is_some_and(reqwest::Error::is_connect)
}
