//! The one retry policy of Parley's HTTP clients, as a tower [`Policy`] over [`Answer`]s.
//!
//! A request that never reached the server (connection refused) is always safe to send again; a
//! request that may have reached it is retried only when the call allows it
//! ([`Retry::Transient`]), since a tool call can change the server's state. Retried: transport
//! errors, timeouts, bodies over the limit, 408, 429 and 5xx answers, and a 2xx whose body the
//! request does not [`accept`](Attempt::accept) (a 200 that is not a completion), all within one
//! budget of `max_retries`. Waits back off exponentially with jitter, or last as long as the
//! answer's `Retry-After` asks (at most a minute). A wait that would outlast the session's
//! [`Deadline`] gives up at once, with the last answer or error as the call's result.

use std::cell::Cell;
use std::future::Future;
use std::time::Duration;

use parley_core::FailureClass;
use parley_core::deadline::{Deadline, OpenCall};
use tower::BoxError;
use tower::retry::Policy;

use crate::body::{Answer, TooLarge};

/// Which failures a call may be retried after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Only failures where the request was never sent (connection refused): tool calls, seeds,
    /// steps and verifies, which may change state.
    Unsent,
    /// Also timeouts, dropped connections, 408, 429, 5xx and unaccepted 2xx answers:
    /// idempotent calls and model calls.
    Transient,
}

/// A request the policy can send again.
pub trait Attempt: Sized {
    /// What the service under the policy sends.
    type Request;

    /// The request to send, once the policy has kept what it needs to send it again.
    fn into_request(self) -> Self::Request;

    /// A copy to send again, or `None` when the request cannot be copied (a streamed body).
    fn resend(&self) -> Option<Self>;

    /// Which failures this request may be retried after.
    fn retry(&self) -> Retry {
        Retry::Transient
    }

    /// Whether a 2xx answer is what was asked for. One that is not becomes an [`Unaccepted`]
    /// error, retried and reported like any failed attempt.
    fn accept(&self, _answer: &Answer) -> Result<(), String> {
        Ok(())
    }
}

/// A 2xx answer whose body is not what the request asked for, with that (bounded, redacted) body.
#[derive(Debug, thiserror::Error)]
#[error("HTTP {status} with a body that is not what was asked for: {why}")]
pub struct Unaccepted {
    pub status: u16,
    pub why: String,
    pub body: Vec<u8>,
}

/// The call gave up because its next wait would outlast the session; carries the last error.
#[derive(Debug, thiserror::Error)]
#[error("{source} (not retried: the session's time runs out before the next attempt)")]
pub struct GaveUp {
    pub source: BoxError,
}

/// The longest wait honoured; a server asking for more is asked again after this.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// The one retry policy (see the module's docs). Cloned per call by tower, so `attempts` counts
/// the attempts of one call.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    pub max_retries: u32,
    /// The first backoff; it doubles on each retry.
    pub base_backoff: Duration,
    /// The longest backoff.
    pub max_backoff: Duration,
    attempts: u32,
}

impl RetryPolicy {
    pub fn new(max_retries: u32, base_backoff: Duration, max_backoff: Duration) -> RetryPolicy {
        RetryPolicy { max_retries, base_backoff, max_backoff, attempts: 0 }
    }

    fn backoff(&self) -> Duration {
        backoff(self.base_backoff, self.max_backoff, self.attempts)
    }
}

/// The one backoff: after failed attempt `attempt` (from 1), a random wait between half and all
/// of `base * 2^(attempt - 1)`, capped at `max`, so that sessions failing together do not retry
/// together. Never panics, whatever the durations.
pub fn backoff(base: Duration, max: Duration, attempt: u32) -> Duration {
    let doubled = 2u32.saturating_pow(attempt.saturating_sub(1));
    let ceiling = base.saturating_mul(doubled).min(max);
    // `mul_f64` panics when the product overflows (a ceiling near `Duration::MAX`).
    Duration::try_from_secs_f64(ceiling.as_secs_f64() * (0.5 + fastrand::f64() / 2.0)).unwrap_or(ceiling)
}

impl<R: Attempt> Policy<R, Answer, BoxError> for RetryPolicy {
    type Future = tokio::time::Sleep;

    fn retry(&mut self, request: &mut R, result: &mut Result<Answer, BoxError>) -> Option<Self::Future> {
        self.attempts += 1;
        let _ = CALL.try_with(|call| call.attempts.set(self.attempts));
        if let Ok(answer) = result
            && answer.is_success()
            && let Err(why) = request.accept(answer)
        {
            let body = std::mem::take(&mut answer.body);
            *result = Err(Box::new(Unaccepted { status: answer.status, why, body }));
        }
        let (class, asked) = match &*result {
            Ok(answer) => match answer.status {
                429 => (FailureClass::RateLimited, answer.retry_after()),
                408 => (FailureClass::Timeout, answer.retry_after()),
                500..=599 => (FailureClass::ServerError, answer.retry_after()),
                _ => return None,
            },
            Err(error) => (class_of_error(error), None),
        };
        let unsent = result.as_ref().err().is_some_and(is_unsent);
        if !(unsent || request.retry() == Retry::Transient) || self.attempts > self.max_retries {
            return None;
        }
        let wait = asked.map_or_else(|| self.backoff(), |asked| asked.min(MAX_RETRY_AFTER));
        // What the server asked for, not the shorter wait honoured: a server that will not serve
        // this session before its time is up fails the call now, rather than at the deadline.
        let needed = asked.unwrap_or(wait);
        if let Some(left) = Deadline::current().and_then(|d| d.remaining())
            && needed >= left
        {
            tracing::debug!(?needed, ?left, "not retrying: the session's time runs out first");
            if result.is_err()
                && let Err(source) = std::mem::replace(result, Ok(Answer::default()))
            {
                *result = Err(Box::new(GaveUp { source }));
            }
            return None;
        }
        let _ = CALL.try_with(|call| {
            if let Some(open) = call.open.borrow_mut().as_mut() {
                open.retrying(class);
            }
        });
        tracing::debug!(attempt = self.attempts, ?wait, %class, "retrying an HTTP call");
        Some(tokio::time::sleep(wait))
    }

    fn clone_request(&mut self, request: &R) -> Option<R> {
        request.resend()
    }
}

/// The failure class of an error from inside the stack.
pub fn class_of_error(error: &BoxError) -> FailureClass {
    let error: &(dyn std::error::Error + 'static) = match error.downcast_ref::<GaveUp>() {
        Some(gave_up) => gave_up.source.as_ref(),
        None => error.as_ref(),
    };
    if error.is::<tower::timeout::error::Elapsed>() {
        FailureClass::Timeout
    } else if error.is::<TooLarge>() || error.is::<Unaccepted>() {
        FailureClass::MalformedResponse
    } else {
        FailureClass::Connection
    }
}

/// Whether the request certainly never reached the server.
pub(crate) fn is_unsent(error: &BoxError) -> bool {
    error.downcast_ref::<crate::plain::PlainError>().is_some_and(crate::plain::PlainError::is_unsent)
        || error
            .downcast_ref::<hyper_util::client::legacy::Error>()
            .is_some_and(hyper_util::client::legacy::Error::is_connect)
}

/// One logical call under way: its attempts, and its registration with the session's deadline.
struct CallState {
    attempts: Cell<u32>,
    open: std::cell::RefCell<Option<OpenCall>>,
}

tokio::task_local! {
    static CALL: CallState;
}

/// Runs one logical call (every attempt of it) and returns its result with the attempts made.
/// While it runs, the call is registered with the session's deadline, so that a session whose
/// time runs out during it is recorded as this endpoint's failure.
pub async fn track<F: Future>(call: F) -> (F::Output, u32) {
    let state = CallState {
        attempts: Cell::new(0),
        open: std::cell::RefCell::new(Deadline::current().map(|d| d.begin_call())),
    };
    CALL.scope(state, async {
        let output = call.await;
        (output, CALL.with(|c| c.attempts.get()).max(1))
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use tower::{ServiceBuilder, ServiceExt};

    use super::*;

    #[derive(Clone)]
    struct Ask;

    impl Attempt for Ask {
        type Request = Ask;

        fn into_request(self) -> Ask {
            self
        }

        fn resend(&self) -> Option<Ask> {
            Some(Ask)
        }

        fn accept(&self, answer: &Answer) -> Result<(), String> {
            if answer.body == b"ok" { Ok(()) } else { Err("not ok".into()) }
        }
    }

    /// A service that answers every attempt with `status`, `body` and `retry_after`, counting.
    fn answering(
        status: u16,
        body: &'static str,
        retry_after: Option<&'static str>,
        count: Arc<AtomicU32>,
    ) -> impl tower::Service<Ask, Response = Answer, Error = BoxError, Future: Send> + Clone {
        let service = tower::service_fn(move |_: Ask| {
            count.fetch_add(1, Ordering::SeqCst);
            let mut answer = Answer { status, body: body.as_bytes().to_vec(), ..Answer::default() };
            if let Some(value) = retry_after {
                answer.headers.insert(http::header::RETRY_AFTER, value.parse().unwrap());
            }
            async move { Ok::<_, BoxError>(answer) }
        });
        ServiceBuilder::new()
            .retry(RetryPolicy::new(3, Duration::from_millis(1), Duration::from_millis(2)))
            .service(service)
    }

    #[test]
    fn backoff_of_any_size_never_panics() {
        let mut policy = RetryPolicy::new(u32::MAX, Duration::MAX, Duration::MAX);
        for attempts in [0, 1, 2, 64, u32::MAX] {
            policy.attempts = attempts;
            assert!(policy.backoff() >= Duration::MAX / 4);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_2xx_that_is_not_accepted_is_retried_within_the_one_budget() {
        let count = Arc::new(AtomicU32::new(0));
        let (result, attempts) = track(answering(200, "garbage", None, count.clone()).oneshot(Ask)).await;
        assert_eq!(count.load(Ordering::SeqCst), 4, "max_retries 3 makes 4 attempts in all");
        assert_eq!(attempts, 4);
        let error = result.unwrap_err();
        assert!(error.downcast_ref::<Unaccepted>().is_some_and(|u| u.body == b"garbage"), "{error}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_longer_than_the_session_has_left_fails_at_once() {
        let count = Arc::new(AtomicU32::new(0));
        let deadline = Deadline::after(Duration::from_secs(30));
        let call = answering(429, "slow down", Some("100000"), count.clone()).oneshot(Ask);
        let (result, attempts) = deadline.scope(track(call)).await;
        assert_eq!((count.load(Ordering::SeqCst), attempts), (1, 1));
        assert_eq!(result.unwrap().status, 429);
        // Without a deadline the same answer is retried.
        let count = Arc::new(AtomicU32::new(0));
        let (_, attempts) = track(answering(429, "slow down", Some("1"), count.clone()).oneshot(Ask)).await;
        assert_eq!(attempts, 4);
    }

    #[tokio::test(start_paused = true)]
    async fn the_session_sees_the_retries_of_a_call_under_way() {
        let deadline = Deadline::after(Duration::from_secs(30));
        let count = Arc::new(AtomicU32::new(0));
        let service = answering(503, "busy", Some("5"), count.clone());
        let watcher = deadline.clone();
        let call = tokio::spawn(deadline.scope(track(service.oneshot(Ask))));
        tokio::time::sleep(Duration::from_secs(7)).await;
        let open = watcher.open().expect("a call is open");
        assert_eq!((open.calls, open.retries, open.class), (1, 2, Some(FailureClass::ServerError)));
        let _ = call.await.unwrap();
        assert_eq!(watcher.open(), None);
    }
}
