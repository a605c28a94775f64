//! Admission: how many requests run at once and how many more may wait, for one environment
//! and, when a service hosts several, for the whole service as well.
//!
//! Each bound is two semaphores: `admitted` (concurrency + queue), taken at once or the request
//! is refused with a 503 and `Retry-After`; `running` (concurrency), waited for by admitted
//! requests. A request to one of several environments takes its environment's permits first,
//! then the whole's: a stalled environment holds at most its own concurrency of the whole's
//! running slots, and its queued requests none, so the others keep theirs.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// One bound: sessions at once, and requests that may wait beyond them.
pub(crate) struct Admission {
    admitted: Arc<Semaphore>,
    running: Arc<Semaphore>,
    pub(crate) concurrency: usize,
    pub(crate) queue: usize,
}

impl Admission {
    pub(crate) fn new(concurrency: usize, queue: usize) -> Admission {
        Admission {
            admitted: Arc::new(Semaphore::new(concurrency + queue)),
            running: Arc::new(Semaphore::new(concurrency)),
            concurrency,
            queue,
        }
    }

    /// A place among the requests admitted, or `None` when every slot and the queue are taken.
    pub(crate) fn admit(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.admitted).try_acquire_owned().ok()
    }

    /// A running slot, once one is free; `None` when the service is closing it.
    pub(crate) async fn run(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.running).acquire_owned().await.ok()
    }

    /// Requests admitted at most: running and waiting.
    pub(crate) fn capacity(&self) -> usize {
        self.concurrency + self.queue
    }
}

/// A request's places: its environment's and, in a service of several, the whole's. They are
/// held, never read: dropping it gives them back.
pub(crate) struct Admitted {
    _own: OwnedSemaphorePermit,
    _whole: Option<OwnedSemaphorePermit>,
}

impl Admitted {
    pub(crate) fn new(own: OwnedSemaphorePermit, whole: Option<OwnedSemaphorePermit>) -> Admitted {
        Admitted { _own: own, _whole: whole }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_admits_its_concurrency_and_queue_and_no_more() {
        let bound = Admission::new(1, 1);
        let first = bound.admit().expect("a slot");
        let second = bound.admit().expect("a place in the queue");
        assert!(bound.admit().is_none(), "every slot and the queue are taken");
        drop(first);
        assert!(bound.admit().is_some(), "a place given back is taken again");
        drop(second);
        assert_eq!(bound.capacity(), 2);
    }
}
