//! The handle a store's sessions send their turns through, the same on both stores: it drops
//! turns in the benchmark mode without per-turn persistence, rewrites raw requests as deltas on
//! the session's own task (so the writer does no more than write), queues the turn for the
//! store's writer, and waits for the commit. Only the writer behind the queue differs: one task
//! on SQLite's only writing connection, a few tasks on PostgreSQL's pool.

use std::sync::Arc;

use parley_core::{Claim, Fence, SessionOutcome, StoreError, TurnRecord};
use tokio::sync::{mpsc, oneshot};

use crate::StoreOptions;
use crate::delta::{Apart, Deltas};

/// Turns taken into one transaction at most, by either store's writer. Large enough to
/// amortise the commit, small enough to keep a commit's latency low.
pub(crate) const MAX_BATCH: usize = 1024;

/// Each write's answer in a batch a writer tried: `Ok` or why it was left out (a fence), or the
/// batch's own failure, which is every write's answer.
pub(crate) type Answers = Result<Vec<Result<(), StoreError>>, StoreError>;

/// One turn (with the session's end, for its last) on its way to a writer, and who waits for
/// its commit.
pub(crate) struct Write {
    pub claim: Claim,
    pub turn: TurnRecord,
    /// The session's end, when this write records it (a write's one large part, held apart).
    pub outcome: Option<Box<SessionOutcome>>,
    /// The tool lists its requests keep apart in `texts` (see `delta`).
    pub apart: Vec<Apart>,
    pub done: oneshot::Sender<Result<(), StoreError>>,
}

/// The sending side of a writer's queue of `C`, a command the writer takes (a [`Write`], or
/// an enum holding one beside the writer's other commands).
pub(crate) struct WriterHandle<C> {
    tx: mpsc::UnboundedSender<C>,
    /// `false` only in the benchmark mode without per-turn persistence (see `NO_TURNS_VARIABLE`).
    turns: bool,
    /// Raw requests become deltas against the session's previous call; `None` without raw bodies.
    deltas: Option<Arc<Deltas>>,
}

impl<C> Clone for WriterHandle<C> {
    fn clone(&self) -> WriterHandle<C> {
        WriterHandle { tx: self.tx.clone(), turns: self.turns, deltas: self.deltas.clone() }
    }
}

/// The writer has ended, or ended before it answered.
fn gone(what: &str) -> StoreError {
    StoreError::WriterGone(what.into())
}

impl<C: From<Write>> WriterHandle<C> {
    pub(crate) fn new(tx: mpsc::UnboundedSender<C>, options: &StoreOptions, turns: bool) -> WriterHandle<C> {
        WriterHandle { tx, turns, deltas: options.raw_model_calls.then(Arc::default) }
    }

    /// Commits `turn` (and `outcome`, the session's end) under `claim`; returns once it is
    /// committed, or refused.
    pub(crate) async fn write(
        &self,
        claim: Claim,
        turn: TurnRecord,
        outcome: Option<SessionOutcome>,
    ) -> Result<(), StoreError> {
        let session = claim.session;
        let mut turn = match (self.turns, outcome.is_some()) {
            (true, _) => turn,
            (false, false) => return Ok(()),
            (false, true) => TurnRecord::default(),
        };
        let apart = match &self.deltas {
            Some(deltas) => deltas.encode(session, &mut turn, outcome.is_some()),
            None => Vec::new(),
        };
        let (done, ack) = oneshot::channel();
        self.send(Write { claim, turn, outcome: outcome.map(Box::new), apart, done }.into())?;
        let result = ack.await.unwrap_or_else(|_| Err(gone("the writer task ended before committing")));
        if result.is_err()
            && let Some(deltas) = &self.deltas
        {
            // A later delta must never name a call that was not stored.
            deltas.forget(session);
        }
        result
    }

    /// Queues a command for the writer.
    pub(crate) fn send(&self, command: C) -> Result<(), StoreError> {
        self.tx.send(command).map_err(|_| gone("the writer task has ended"))
    }
}

/// A write's answer from its session's fence as the table holds it under the batch's lock
/// (`None`: no row), the same on both stores: written when its claim is the session's current
/// one, else left out, as taken over or as naming no session of the database `db`.
pub(crate) fn fenced(claim: Claim, current: Option<Fence>, db: &dyn std::fmt::Display) -> Result<(), StoreError> {
    match current {
        Some(current) if current == claim.fence => Ok(()),
        Some(current) => Err(StoreError::Fenced { session: claim.session, fence: claim.fence, current }),
        None => Err(StoreError::Database(format!(
            "{db}: session {} is not in table `sessions`; its turn was not written",
            claim.session
        ))),
    }
}

/// Sends each write of `batch` its answer: its own, or the batch's failure (logged once).
pub(crate) fn answer(batch: impl ExactSizeIterator<Item = Write>, answers: Answers) {
    match answers {
        Ok(answers) => {
            for (w, answer) in batch.zip(answers) {
                let _ = w.done.send(answer);
            }
        }
        Err(e) => {
            tracing::error!(error = %e, turns = batch.len(), "the store could not commit a batch");
            for w in batch {
                let _ = w.done.send(Err(e.clone()));
            }
        }
    }
}
