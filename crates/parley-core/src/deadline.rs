//! A session's deadline, visible to the clients that wait on endpoints while the session runs.
//!
//! The engine runs a session's moves inside [`Deadline::scope`]. A client reads
//! [`Deadline::current`] to give up a call whose next wait would outlast the session (a
//! `Retry-After` longer than the time left fails the call at once), and holds an [`OpenCall`]
//! while a call is under way, noting each retry and why it was made. When the session's time
//! runs out during a call, the engine reads [`Deadline::open`] and records the session as the
//! endpoint's failure, with that class and those retries, rather than as the agent's.
//!
//! The deadline travels in a thread-local that is set only while the session's future is being
//! polled, as a task-local would, so this crate needs no async runtime. Work spawned onto other
//! tasks does not see it.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::FailureClass;

thread_local! {
    static CURRENT: RefCell<Option<Deadline>> = const { RefCell::new(None) };
}

/// When a session's time runs out, and the endpoint calls it has open.
#[derive(Debug, Clone)]
pub struct Deadline {
    /// `None` when the limit is too far away to be represented: the session never times out.
    at: Option<Instant>,
    open: Arc<Mutex<Open>>,
}

/// The endpoint calls a session has open, the retries they made so far, and why the last retry
/// was made.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Open {
    pub calls: u32,
    pub retries: u32,
    pub class: Option<FailureClass>,
}

impl Deadline {
    /// A deadline `limit` from now; a limit too large to add to the clock never comes.
    pub fn after(limit: Duration) -> Deadline {
        Deadline { at: Instant::now().checked_add(limit), open: Arc::default() }
    }

    /// The time left, or `None` when there is no deadline.
    pub fn remaining(&self) -> Option<Duration> {
        self.at.map(|at| at.saturating_duration_since(Instant::now()))
    }

    /// The deadline of the session whose future is being polled on this thread, if any.
    pub fn current() -> Option<Deadline> {
        CURRENT.with(|current| current.borrow().clone())
    }

    /// Runs `future` with this deadline as the [`current`](Self::current) one.
    pub fn scope<F: Future>(&self, future: F) -> Scoped<F> {
        Scoped { deadline: self.clone(), future: Box::pin(future) }
    }

    /// The calls open now, or `None` when the session is not waiting on any endpoint.
    pub fn open(&self) -> Option<Open> {
        let open = *self.open.lock().unwrap_or_else(PoisonError::into_inner);
        (open.calls > 0).then_some(open)
    }

    /// Registers a call under way until the returned value is dropped.
    pub fn begin_call(&self) -> OpenCall {
        self.open.lock().unwrap_or_else(PoisonError::into_inner).calls += 1;
        OpenCall { open: self.open.clone(), retries: 0 }
    }
}

/// One endpoint call under way; dropping it (the call ended or was abandoned) unregisters it.
#[derive(Debug)]
pub struct OpenCall {
    open: Arc<Mutex<Open>>,
    retries: u32,
}

impl OpenCall {
    /// Notes a retry, made because the last attempt failed with `class`.
    pub fn retrying(&mut self, class: FailureClass) {
        self.retries += 1;
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.retries += 1;
        open.class = Some(class);
    }
}

impl Drop for OpenCall {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.calls = open.calls.saturating_sub(1);
        open.retries = open.retries.saturating_sub(self.retries);
        if open.calls == 0 {
            open.class = None;
        }
    }
}

/// A future run under a [`Deadline`]; see [`Deadline::scope`].
#[derive(Debug)]
pub struct Scoped<F> {
    deadline: Deadline,
    // Boxed so that this wrapper is `Unpin` and needs no unsafe pin projection.
    future: Pin<Box<F>>,
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let outer = CURRENT.with(|current| current.replace(Some(this.deadline.clone())));
        // Put the outer value back even if the inner future panics, so that a panic caught by the
        // scheduler leaves no stale deadline on this thread.
        let _restore = Restore(Some(outer));
        this.future.as_mut().poll(cx)
    }
}

struct Restore(Option<Option<Deadline>>);

impl Drop for Restore {
    fn drop(&mut self) {
        if let Some(outer) = self.0.take() {
            CURRENT.with(|current| *current.borrow_mut() = outer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_too_large_for_the_clock_is_no_deadline() {
        assert_eq!(Deadline::after(Duration::MAX).remaining(), None);
        assert!(Deadline::after(Duration::from_secs(60)).remaining().is_some_and(|r| r <= Duration::from_secs(60)));
    }

    #[test]
    fn open_calls_count_their_retries_until_they_end() {
        let deadline = Deadline::after(Duration::from_secs(1));
        assert_eq!(deadline.open(), None);
        let mut call = deadline.begin_call();
        call.retrying(FailureClass::RateLimited);
        call.retrying(FailureClass::RateLimited);
        assert_eq!(deadline.open(), Some(Open { calls: 1, retries: 2, class: Some(FailureClass::RateLimited) }));
        drop(call);
        assert_eq!(deadline.open(), None);
    }
}
